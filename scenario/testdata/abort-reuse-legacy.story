# abort-reuse on the legacy engine, seed 68, strategy starve:output-handler: the shortest failing
# interleaving of the first 200 seeds, shrunk from 27 preemptions, 42 waits, 195 decisions
# to 2 preemptions, 9 waits, 144 decisions. Regenerate: go test ./scenario -run Golden -rewrite
#
# property no-cross-incarnation-delivery violated: frame 25 of abort-a (incarnation 1, tokens [495] at position 8) was delivered to incarnation 4 of "abort-a" (detected in task output-handler after frontend.lock)
#
# llmdst-schedule v1
# task 0 "main"
# task 1 "engine-core"
# task 2 "output-handler"
# steps 144
# 0*12 2*2 1*10 2 @400000 2*3 1*4 @600000 1*4 @800000 1*4 @1000000 1*4 @1200000 1*4 @1400000 1*4
# @1600000 1*4 @1800000 1*4 0*11 @2000000 1*8 2*22 0*7 1*2 2*3 0*7 1*7 2*6 0*2
# end

             +0s  main            adds abort-a#1 (internal id abort-a)
             +0s  main            adds survivor#2 (internal id survivor)
             +0s  main            adds abort-b#3 (internal id abort-b)
          +200µs  …               engine-core emits frames of abort-a#1 ×1 (tokens 0…0)
                                  engine-core emits frames of survivor#2 ×1 (tokens 0…0)
                                  engine-core emits frames of abort-b#3 ×1 (tokens 0…0)
          +200µs  strategy        withholds output-handler for 200µs (guided)
          +400µs  …               output-handler delivers frames of abort-a#1 ×1 (tokens 0…0)
                                  output-handler delivers frames of survivor#2 ×1 (tokens 0…0)
                                  output-handler delivers frames of abort-b#3 ×1 (tokens 0…0)
                                  the clock moves on 200µs while every runnable task is withheld
          +400µs  strategy        guided: preempt task 2 "output-handler" at "core-output.lock" to run task 1 "engine-core"
          +400µs  …               engine-core emits frames of abort-a#1 ×1 (tokens 1…1)
                                  engine-core emits frames of survivor#2 ×1 (tokens 1…1)
                                  engine-core emits frames of abort-b#3 ×1 (tokens 1…1)
          +400µs  strategy        withholds main for 1.4ms (guided)
          +400µs  strategy        withholds output-handler for 1.6ms (guided)
    +600µs…1.8ms  …               engine-core emits frames of abort-a#1 ×7 (tokens 2…8)
                                  engine-core emits frames of survivor#2 ×6 (tokens 2…7) finished length
                                  engine-core emits frames of abort-b#3 ×7 (tokens 2…8)
                                  main takes outputs of abort-a#1 ×1
                                  the clock moves on 1.4ms while every runnable task is withheld
          +1.8ms  main            aborts abort-a#1: its frontend state is removed and its collector gets the final "abort" output
          +1.8ms  main            finishes abort-a#1: abort, 1 token(s)
          +1.8ms  main            aborts abort-b#3: its frontend state is removed and its collector gets the final "abort" output
          +1.8ms  main            finishes abort-b#3: abort, 1 token(s)
          +1.8ms  main            takes the final output of abort-a#1: 0 token(s), abort
          +1.8ms  main            takes the final output of abort-b#3: 1 token(s), abort
      +1.8ms…2ms  …               main takes outputs of survivor#2 ×1
                                  the clock moves on 200µs while every runnable task is withheld
            +2ms  engine-core     processes the abort of abort-a#1: the core drops it
            +2ms  engine-core     processes the abort of abort-b#3: the core drops it
            +2ms  …               engine-core finds nothing to abort for abort-a ×1
                                  engine-core finds nothing to abort for abort-b ×1
                                  output-handler drops (no frontend state for abort-a) frames of abort-a#1 ×7 (tokens 1…7)
                                  output-handler delivers frames of survivor#2 ×7 (tokens 1…7) finished length
                                  output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×6 (tokens 1…6)
            +2ms  output-handler  finishes survivor#2: length, 8 token(s)
            +2ms  …               output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×1 (tokens 7…7)
            +2ms  strategy        guided: preempt task 2 "output-handler" at "frontend.lock" to run task 0 "main"
            +2ms  main            takes the final output of survivor#2: 7 token(s), length
            +2ms  main            adds abort-a#4 (internal id abort-a)
            +2ms  output-handler  delivers frame 25 of abort-a#1 (token [495] at 8) into the collector of abort-a#4 — STALE: a previous incarnation's token
            +2ms  …               output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×1 (tokens 8…8)
                                  main takes outputs of abort-a#4 ×1
            +2ms  main            aborts abort-a#4: its frontend state is removed and its collector gets the final "abort" output
            +2ms  main            finishes abort-a#4: abort, 1 token(s)
          +2.2ms  …               engine-core emits frames of abort-a#4 ×2 (tokens 0…1) finished abort
                                  output-handler drops (no frontend state for abort-a) frames of abort-a#4 ×2 (tokens 0…1) finished abort
