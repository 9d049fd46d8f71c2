# abort-reuse on the legacy engine, seed 195, strategy starve:output-handler: the shortest failing
# interleaving of the first 200 seeds. Regenerate: go test ./scenario -run Golden -rewrite
#
# property no-cross-incarnation-delivery violated: frame 26 of abort-a (incarnation 1, tokens [442] at position 9) was delivered to incarnation 4 of "abort-a" (detected in task output-handler after frontend.lock)

             +0s  main            adds abort-a#1 (internal id abort-a)
             +0s  strategy        withholds output-handler for 200µs (starve:output-handler)
             +0s  main            adds survivor#2 (internal id survivor)
             +0s  main            adds abort-b#3 (internal id abort-b)
   +200µs…2.25ms  …               strategy withholds output-handler 4 more times, 2.15ms in all
                                  engine-core emits frames of abort-a#1 ×11 (tokens 0…10)
                                  engine-core emits frames of survivor#2 ×8 (tokens 0…7) finished length
                                  engine-core emits frames of abort-b#3 ×10 (tokens 0…9)
                                  output-handler delivers frames of abort-a#1 ×1 (tokens 0…0)
                                  main takes outputs of abort-a#1 ×1
                                  the clock moves on 2.25ms while every runnable task is withheld
         +2.25ms  main            aborts abort-a#1: its frontend state is removed and its collector gets the final "abort" output
         +2.25ms  main            finishes abort-a#1: abort, 1 token(s)
         +2.25ms  main            aborts abort-b#3: its frontend state is removed and its collector gets the final "abort" output
         +2.25ms  main            finishes abort-b#3: abort, 0 token(s)
         +2.25ms  main            takes the final output of abort-a#1: 0 token(s), abort
         +2.25ms  main            takes the final output of abort-b#3: 0 token(s), abort
   +2.35ms…2.4ms  …               output-handler drops (no frontend state for abort-a) frames of abort-a#1 ×1 (tokens 1…1)
                                  output-handler delivers frames of survivor#2 ×1 (tokens 0…0)
                                  strategy withholds output-handler once more, for 100µs
                                  the clock moves on 150µs while every runnable task is withheld
          +2.4ms  engine-core     processes the abort of abort-a#1: the core drops it
          +2.4ms  engine-core     processes the abort of abort-b#3: the core drops it
  +2.4ms…11.65ms  …               engine-core finds nothing to abort for abort-a ×1
                                  engine-core finds nothing to abort for abort-b ×1
                                  output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×7 (tokens 0…6)
                                  strategy withholds output-handler 15 more times, 9.2ms in all
                                  main takes outputs of survivor#2 ×7
                                  output-handler drops (no frontend state for abort-a) frames of abort-a#1 ×7 (tokens 2…8)
                                  output-handler delivers frames of survivor#2 ×7 (tokens 1…7) finished length
                                  the clock moves on 9.25ms while every runnable task is withheld
        +11.65ms  output-handler  finishes survivor#2: length, 8 token(s)
        +11.65ms  …               output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×1 (tokens 7…7)
        +11.65ms  main            takes the final output of survivor#2: 1 token(s), length
        +11.65ms  …               strategy withholds output-handler once more, for 100µs
        +11.65ms  main            adds abort-a#4 (internal id abort-a)
        +11.75ms  …               the clock moves on 100µs while every runnable task is withheld
        +11.75ms  output-handler  delivers frame 26 of abort-a#1 (token [442] at 9) into the collector of abort-a#4 — STALE: a previous incarnation's token
+11.75ms…11.85ms  …               strategy withholds output-handler 2 more times, 200µs in all
                                  output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×1 (tokens 8…8)
                                  engine-core emits frames of abort-a#4 ×1 (tokens 0…0)
                                  main takes outputs of abort-a#4 ×1
                                  the clock moves on 100µs while every runnable task is withheld
        +11.85ms  main            aborts abort-a#4: its frontend state is removed and its collector gets the final "abort" output
        +11.85ms  main            finishes abort-a#4: abort, 1 token(s)
 +11.95ms…21.4ms  …               strategy withholds output-handler 12 more times, 9.45ms in all
                                  engine-core emits frames of abort-a#4 ×2 (tokens 1…2) finished abort
                                  output-handler drops (no frontend state for abort-a) frames of abort-a#1 ×1 (tokens 10…10)
                                  output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×1 (tokens 9…9)
                                  output-handler drops (no frontend state for abort-a) frames of abort-a#4 ×3 (tokens 0…2) finished abort
                                  the clock moves on 9.55ms while every runnable task is withheld
