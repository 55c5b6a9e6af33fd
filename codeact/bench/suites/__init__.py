"""The suites shipped with codeact: ``tool-chains`` and ``data-analysis`` (original tasks, offline tools)."""
