// Package e2e checks what people see: it opens the HTML timeline that
// simrun draws of a failing legacy seed in headless Chromium and checks
// the page after its script ran — the lanes, the stale frame's path, the
// starvation shading — and a screenshot of it.
//
// The tests need a browser, so they build only with the e2e tag and run
// from make e2e, which installs Debian's chromium when it is missing:
//
//	make e2e
//	# or, with a page and a browser of your own:
//	LLMDST_E2E_HTML=out/e2e/timeline.html LLMDST_CHROMIUM=/usr/bin/chromium \
//		go test -tags e2e -count=1 ./e2e
//
// Without LLMDST_E2E_HTML the test builds simrun and draws the page itself.
package e2e
