"""Reports of a study for people and CI: HTML (self-contained, plots inline), Markdown for
``$GITHUB_STEP_SUMMARY``, JUnit XML and JSON. Everything renders from one ``StudyView``."""
