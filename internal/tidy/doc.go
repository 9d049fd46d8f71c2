// Package tidy enforces the bans of the engine packages: code in core/ and
// engine/ must reach time, concurrency and randomness only through the
// task and clock seam, or the simulator cannot run it one task at a time.
//
// The caller's duties:
//
//  1. Call Check on a package directory; it parses every non-test Go file.
//  2. Report each Finding: it names the file, the line, the banned
//     construct and the call to use instead.
//
// Usage:
//
//	findings, err := tidy.Check("core")
//	for _, f := range findings {
//		fmt.Println(f)
//	}
package tidy
