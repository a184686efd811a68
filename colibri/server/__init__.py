"""The reference server: a Falcon app that implements spec/ on the C engine."""
