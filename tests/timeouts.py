"""Time bounds for the tests' own requests.

httpx gives a request 5 s by default; a first request to a server a test started (its
lazy imports, its first database connection) can take longer on a 2-core machine that the
rest of the suite keeps busy. The bound is there to end a hung test, not to judge speed:
benches in bench/ do that.
"""

REQUEST_TIMEOUT = 60.0
