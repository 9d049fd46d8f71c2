# abort-reuse on the legacy engine, seed 75, strategy starve:output-handler: the shortest failing
# interleaving of the first 200 seeds, shrunk from 25 preemptions, 42 waits, 174 decisions
# to 3 preemptions, 8 waits, 116 decisions. Regenerate: go test ./scenario -run Golden -rewrite
#
# property no-cross-incarnation-delivery violated: frame 25 of abort-a (incarnation 1, tokens [495] at position 8) was delivered to incarnation 4 of "abort-a" (detected in task output-handler after frontend.lock)
#
# llmdst-schedule v1
# task 0 "main"
# task 1 "engine-core"
# task 2 "output-handler"
# steps 116
# 0*12 1*4 2*2 1*2 2 @400000 2*2 1*2 @600000 1*2 @800000 1*2 @1000000 1*2 @1200000 1*2 @1400000 1*2
# @1600000 1*2 @1800000 2*4 1*2 0*2 2*3 0*10 2*18 0*7 2*3 0*7 1*9 2*4 0*2
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
                                  the clock moves on 200µs while every runnable task is withheld
          +400µs  strategy        guided: preempt task 2 "output-handler" at "collector.lock" to run task 1 "engine-core"
          +400µs  …               engine-core emits frames of abort-a#1 ×1 (tokens 1…1)
                                  engine-core emits frames of survivor#2 ×1 (tokens 1…1)
                                  engine-core emits frames of abort-b#3 ×1 (tokens 1…1)
          +400µs  strategy        withholds main for 1.4ms (guided)
          +400µs  strategy        withholds output-handler for 1.4ms (guided)
    +600µs…1.8ms  …               engine-core emits frames of abort-a#1 ×6 (tokens 2…7)
                                  engine-core emits frames of survivor#2 ×6 (tokens 2…7) finished length
                                  engine-core emits frames of abort-b#3 ×6 (tokens 2…7)
                                  output-handler delivers frames of abort-b#3 ×1 (tokens 0…0)
                                  output-handler delivers frames of abort-a#1 ×1 (tokens 1…1)
                                  output-handler delivers frames of survivor#2 ×1 (tokens 1…1)
                                  the clock moves on 1.4ms while every runnable task is withheld
          +1.8ms  strategy        guided: preempt task 2 "output-handler" at "collector.lock" to run task 1 "engine-core"
          +1.8ms  …               engine-core emits frames of abort-a#1 ×1 (tokens 8…8)
                                  engine-core emits frames of abort-b#3 ×1 (tokens 8…8)
                                  main takes outputs of abort-a#1 ×1
                                  output-handler delivers frames of abort-b#3 ×1 (tokens 1…1)
          +1.8ms  main            aborts abort-a#1: its frontend state is removed and its collector gets the final "abort" output
          +1.8ms  main            finishes abort-a#1: abort, 2 token(s)
          +1.8ms  main            aborts abort-b#3: its frontend state is removed and its collector gets the final "abort" output
          +1.8ms  main            finishes abort-b#3: abort, 2 token(s)
          +1.8ms  main            takes the final output of abort-a#1: 0 token(s), abort
          +1.8ms  main            takes the final output of abort-b#3: 2 token(s), abort
          +1.8ms  …               main takes outputs of survivor#2 ×1
                                  output-handler drops (no frontend state for abort-a) frames of abort-a#1 ×6 (tokens 2…7)
                                  output-handler delivers frames of survivor#2 ×6 (tokens 2…7) finished length
                                  output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×5 (tokens 2…6)
          +1.8ms  output-handler  finishes survivor#2: length, 8 token(s)
          +1.8ms  …               output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×1 (tokens 7…7)
          +1.8ms  strategy        guided: preempt task 2 "output-handler" at "frontend.lock" to run task 0 "main"
          +1.8ms  main            takes the final output of survivor#2: 6 token(s), length
          +1.8ms  main            adds abort-a#4 (internal id abort-a)
          +1.8ms  output-handler  delivers frame 25 of abort-a#1 (token [495] at 8) into the collector of abort-a#4 — STALE: a previous incarnation's token
          +1.8ms  …               output-handler drops (no frontend state for abort-b) frames of abort-b#3 ×1 (tokens 8…8)
                                  main takes outputs of abort-a#4 ×1
          +1.8ms  main            aborts abort-a#4: its frontend state is removed and its collector gets the final "abort" output
          +1.8ms  main            finishes abort-a#4: abort, 1 token(s)
            +2ms  engine-core     processes the abort of abort-a#1: the core drops it
            +2ms  engine-core     processes the abort of abort-b#3: the core drops it
            +2ms  …               engine-core finds nothing to abort for abort-a ×1
                                  engine-core finds nothing to abort for abort-b ×1
                                  engine-core emits frames of abort-a#4 ×1 (tokens 0…0) finished abort
                                  output-handler drops (no frontend state for abort-a) frames of abort-a#4 ×1 (tokens 0…0) finished abort
