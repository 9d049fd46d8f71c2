package triage_test

import (
	"fmt"
	"os"
	"time"

	"github.com/llmdst/llmdst/triage"
)

func ExampleRate() {
	r := triage.Rate{K: 31, N: 120}
	fmt.Println(r)
	fmt.Println(triage.Rate{K: 0, N: 1000})
	fmt.Printf("%.3f\n", r.UpperBound())
	// Output:
	// 31/120 = 25.8% [18.8%, 34.3%]
	// 0/1000 = 0% [≤ 0.3%, rule of three]
	// 0.343
}

func ExampleFisherExact() {
	// 31 of 120 runs failed on main, 52 of 120 with the change.
	p := triage.FisherExact(31, 120-31, 52, 120-52)
	fmt.Printf("p = %.4f\n", p)
	// Output: p = 0.0065
}

func ExampleNormalize() {
	fmt.Println(triage.Normalize("tokenizer: cannot open /tmp/engine_test_4412_tok_0.json after 1.5ms"))
	fmt.Println(triage.Normalize("CHECK( Drain(engine, reused) == 3 ) with expansion: 7 == 3"))
	// Output:
	// tokenizer: cannot open <tmp> after <dur>
	// CHECK( Drain(engine, reused) == <n> ) with expansion: <n> == <n>
}

func ExampleSignature() {
	out := `--- FAIL: TestDrain (0.00s)
    engine_test.go:16: 
        	Error Trace:	/home/ci/engine/engine_test.go:16
        	Error:      	Not equal: 
        	            	expected: 3
        	            	actual  : 4
        	Test:       	TestDrain
FAIL
FAIL	github.com/acme/engine	0.013s
`
	fmt.Println(triage.Signature([]byte(out), 1))
	fmt.Println(triage.Signature([]byte("nothing useful\n"), 2))
	fmt.Println(triage.Failure{TimedOut: true, Timeout: time.Minute}.Signature())
	// Output:
	// TestDrain: engine_test.go:<n>: Not equal: expected: <n> actual : <n>
	// exit status 2
	// timed out after <dur>
}

func ExampleModes() {
	var ms triage.Modes
	ms.Add("tokenizer: cannot open <tmp>", 3, "LLMDST_STRESS_COPY=4 ./t")
	ms.Add("CHECK( Drain(engine, reused) == <n> )", 5, "LLMDST_STRESS_COPY=6 ./t")
	ms.Add("CHECK( Drain(engine, reused) == <n> )", 0, "LLMDST_STRESS_COPY=1 ./t")
	for _, m := range ms.List() {
		fmt.Printf("%s | %s | %s\n", m.Rate(40), m.Signature, m.Example)
	}
	// Output:
	// 2/40 = 5.0% [1.4%, 16.5%] | CHECK( Drain(engine, reused) == <n> ) | LLMDST_STRESS_COPY=1 ./t
	// 1/40 = 2.5% [0.4%, 12.9%] | tokenizer: cannot open <tmp> | LLMDST_STRESS_COPY=4 ./t
}

func ExampleCompareModes() {
	a := triage.Tally{Runs: 120, Modes: []triage.Mode{{Signature: "check", Count: 25}, {Signature: "tok", Count: 6}}}
	b := triage.Tally{Runs: 120, Modes: []triage.Mode{{Signature: "check", Count: 27}, {Signature: "panic", Count: 9}}}
	for _, c := range triage.CompareModes(a, b) {
		fmt.Printf("%-5s A %d/%d  B %d/%d  %s\n", c.Signature, c.A.K, c.A.N, c.B.K, c.B.N, c.Verdict)
	}
	// Output:
	// check A 25/120  B 27/120  no significant change (p=0.88)
	// panic A 0/120  B 9/120  new in B (p=0.0033); holds among 3 modes (p=0.01 corrected)
	// tok   A 6/120  B 0/120  gone in B (p=0.029); may be chance among 3 modes (p=0.059 corrected)
}

func ExampleWriteJUnit() {
	triage.WriteJUnit(os.Stdout, "stress", []triage.JUnitCase{
		{Name: "A round 1 copy 1", Classname: "A: ./t", Time: 120 * time.Millisecond},
		{Name: "A round 1 copy 2", Classname: "A: ./t", Failure: "tokenizer: cannot open <tmp>", Output: "tokenizer: cannot open /tmp/x\n"},
	})
	// Output:
	// <?xml version="1.0" encoding="UTF-8"?>
	// <testsuites tests="2" failures="1" time="0.120">
	//   <testsuite name="stress" tests="2" failures="1" errors="0" skipped="0" time="0.120">
	//     <testcase name="A round 1 copy 1" classname="A: ./t" time="0.120"></testcase>
	//     <testcase name="A round 1 copy 2" classname="A: ./t" time="0.000">
	//       <failure message="tokenizer: cannot open &lt;tmp&gt;" type="failure">tokenizer: cannot open &lt;tmp&gt;</failure>
	//       <system-out>tokenizer: cannot open /tmp/x&#xA;</system-out>
	//     </testcase>
	//   </testsuite>
	// </testsuites>
}
