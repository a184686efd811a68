"""The exit codes of colibri's commands (`colibri`, `colibri serve`, `colibri-conform` and its
subcommands), in one table so that a script reads a number the same way from each of them."""

#: Everything asked for was done, and whatever was judged passed.
EXIT_OK = 0
#: Something judged failed: a rule, a regression, a lint problem, a verdict that differs.
EXIT_FAIL = 1
#: A usage or configuration error: a bad flag, a file that cannot be read or written, a target
#: that wants an API key not given, a model that cannot be loaded.
EXIT_USAGE = 2
#: Nothing was tested: no rule selected, no report given, or the target unreachable or no LLM API.
EXIT_UNTESTED = 3
