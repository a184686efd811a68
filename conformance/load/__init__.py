"""colibri-conform load: the suite's behaviour-neutral vectors sent by many Locust users at once,
every response judged by the same checks as a normal run, plus the load-only rules of
spec/92-load.yaml (see cli.py for the command, docs/load.md for how to run it distributed).

Only cli.py and user.py import Locust (which monkey-patches the process with gevent); the plan,
the judging of one response and the folding of verdicts are plain modules the tests import."""
