"""Browser tests: headless system Chromium driven by Playwright, every non-local request blocked."""
