"""Unit tests of app.stream, in folders that mirror its packages.

pytest puts this folder on sys.path when it loads this file (the suite's `prepend` import mode
does so for every conftest and test module), so the tests of every subfolder import the shared
`stream_support` (a real FraudConsumer with its broker I/O replaced) by name.
"""
