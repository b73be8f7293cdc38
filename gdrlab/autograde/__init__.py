"""The autograder's own side: what runs in nbgrader's process, never in the learner's kernel.

:mod:`.screen` decides from an answer's syntax tree what it may not do; :mod:`.landlock`
confines the grading kernel's file access; :mod:`.steps` are the nbgrader preprocessors that
apply both and scrub the feedback (``labs/nbgrader_config.py`` configures them). The checks the
tests call live in :mod:`gdrlab.grading`.
"""
