"""Reports: the case verdicts (model), and their writers (JSON, JUnit XML, terminal, HTML)."""
