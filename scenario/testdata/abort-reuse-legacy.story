# abort-reuse on the legacy engine, seed 27, strategy starve:output-handler: the shortest failing
# interleaving of the first 200 seeds, shrunk from 17 preemptions, 50 waits, 176 decisions
# to 3 preemptions, 9 waits, 120 decisions. Regenerate: go test ./scenario -run Golden -rewrite
#
# property no-cross-incarnation-delivery violated: frame 27 of abort-a (incarnation 1, tokens [442] at position 9) was delivered to incarnation 4 of "abort-a" (detected in task output-handler after frontend.lock)
#
# llmdst-schedule v1
# task 0 "main"
# task 1 "engine-core"
# task 2 "output-handler"
# steps 120
# 0*12 1*4 2*2 1*2 2 @400000 1*2 @600000 1*2 @800000 1*2 @1000000 1*2 @1200000 1*2 @1400000 1*2
# @1600000 1*2 @1800000 1*2 @2000000 2*11 1*2 0*11 2*18 0*7 2*3 0*7 1*9 2*4 0*2
# end

             +0s  main            adds abort-a#1 (internal id abort-a)
             +0s  main            adds survivor#2 (internal id survivor)
             +0s  main            adds abort-b#3 (internal id abort-b)
          +200µs  …               engine-core emits frames of abort-a#1 ×1 (tokens 0…0)
                                  engine-core emits frames of survivor#2 ×1 (tokens 0…0)
                                  engine-core emits frames of abort-b#3 ×1 (tokens 0…0)
          +200µs  strategy        withholds output-handler for 1.8ms (guided)
          +400µs  …               the clock moves on 200µs while every runnable task is withheld
          +400µs  strategy        guided: preempt task 2 "output-handler" at "frontend.lock" to run task 1 "engine-core"
      +400µs…2ms  …               engine-core emits frames of abort-a#1 ×8 (tokens 1…8)
                                  engine-core emits frames of survivor#2 ×7 (tokens 1…7) finished length
                                  engine-core emits frames of abort-b#3 ×8 (tokens 1…8)
                                  output-handler delivers frames of abort-a#1 ×3 (tokens 0…2)
                                  output-handler delivers frames of survivor#2 ×3 (tokens 0…2)
                                  output-handler delivers frames of abort-b#3 ×3 (tokens 0…2)
                                  the clock moves on 1.6ms while every runnable task is withheld
            +2ms  strategy        guided: preempt task 2 "output-handler" at "core-output.lock" to run task 1 "engine-core"
            +2ms  …               engine-core emits frames of abort-a#1 ×1 (tokens 9…9)
                                  engine-core emits frames of abort-b#3 ×1 (tokens 9…9)
                                  main takes outputs of abort-a#1 ×1
            +2ms  main            aborts abort-a#1: its frontend state is removed and its collector gets the final "abort" output
            +2ms  main            finishes abort-a#1: abort, 3 token(s)
            +2ms  main            aborts abort-b#3: its frontend state is removed and its collector gets the final "abort" output
            +2ms  main            finishes abort-b#3: abort, 3 token(s)
            +2ms  main            takes the final output of abort-a#1: 0 token(s), abort
            +2ms  main            takes the final output of abort-b#3: 3 token(s), abort
            +2ms  …               main takes outputs of survivor#2 ×1
                                  output-handler drops (no frontend state for abort-a) frames of abort-a#1 ×5 (tokens 3…7)
                                  output-handler delivers frames of survivor#2 ×5 (tokens 3…7) finished length
                                  output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×4 (tokens 3…6)
            +2ms  output-handler  finishes survivor#2: length, 8 token(s)
            +2ms  …               output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×2 (tokens 7…8)
                                  output-handler drops (no frontend state for abort-a) frames of abort-a#1 ×1 (tokens 8…8)
            +2ms  strategy        guided: preempt task 2 "output-handler" at "frontend.lock" to run task 0 "main"
            +2ms  main            takes the final output of survivor#2: 5 token(s), length
            +2ms  main            adds abort-a#4 (internal id abort-a)
            +2ms  main            reaches reuse-before-the-core-aborted: an id was added again while the core still held an earlier incarnation of it
            +2ms  main            reaches reuse-with-frames-in-flight: an id was added again while frames of an earlier incarnation of it were on their way to the output processor
            +2ms  output-handler  delivers frame 27 of abort-a#1 (token [442] at 9) into the collector of abort-a#4 — STALE: a previous incarnation's token
            +2ms  output-handler  reaches stale-frame-after-reuse: a frame of an ended incarnation reached the output processor while a newer incarnation of its id was live (the founding race's window)
            +2ms  …               output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×1 (tokens 9…9)
                                  main takes outputs of abort-a#4 ×1
            +2ms  main            aborts abort-a#4: its frontend state is removed and its collector gets the final "abort" output
            +2ms  main            finishes abort-a#4: abort, 1 token(s)
          +2.2ms  engine-core     processes the abort of abort-a#1: the core drops it
          +2.2ms  engine-core     processes the abort of abort-b#3: the core drops it
          +2.2ms  …               engine-core finds nothing to abort for abort-a ×1
                                  engine-core finds nothing to abort for abort-b ×1
                                  engine-core emits frames of abort-a#4 ×1 (tokens 0…0) finished abort
                                  output-handler drops (no frontend state for abort-a) frames of abort-a#4 ×1 (tokens 0…0) finished abort
