"""colibri-conform: the conformance suite (rules from spec/ become tests against any endpoint)."""
