"""nbgrader settings for the gdrlab labs: source notebooks (with solutions) in source/, student
versions generated into release/ by `nbgrader generate_assignment` (scripts/release.py)."""
import os

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.CourseDirectory.course_id = "gdrlab"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(c.CourseDirectory.root, "gradebook.db")

# What a learner sees where a solution was.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Generous per-cell timeout: a live sweep on a slow machine may take a while; graded cells do not.
c.ExecutePreprocessor.timeout = 300
