package triage

import (
	"os"
	"testing"
)

func BenchmarkFisherExactMillions(b *testing.B) {
	for b.Loop() {
		FisherExact(1000, 999000, 1100, 998900)
	}
}

func BenchmarkFisherExactSmall(b *testing.B) {
	for b.Loop() {
		FisherExact(31, 89, 52, 68)
	}
}

func BenchmarkNormalize(b *testing.B) {
	line := "2024-01-02T15:04:05Z engine_test.cpp:131: CHECK( Drain(engine, reused) == 3 ) with expansion: 7 == 3 at 0xc00001a2b0 after 1.5ms in /tmp/x_tok_0.json"
	for b.Loop() {
		Normalize(line)
	}
}

func BenchmarkSignatureGoTestVerbose(b *testing.B) {
	out, err := os.ReadFile("testdata/outputs/go-verbose-all.txt")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		Signature(out, 1)
	}
}
