"""nbgrader settings for the gdrlab labs: source notebooks (with solutions) in source/, student
versions generated into release/ by `nbgrader generate_assignment` (scripts/release.py)."""
import os

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.CourseDirectory.course_id = "gdrlab"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(c.CourseDirectory.root, "gradebook.db")

# What a learner sees where a solution was: a statement that does nothing, so Run All goes on to
# the end of an unfinished lab (answers stay None, a function returns None, and the cells that
# need them say "not done yet": gdrlab.grading.done).
c.ClearSolutions.code_stub = {"python": "...  # YOUR CODE HERE"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"


# A grade an instructor can trust (docs/nbgrader-workflow.md, "What the grader guarantees"):
# answers are screened before anything runs, the kernel runs confined to a copy of the one
# submission (it cannot read source/, other learners' folders or the gradebook), and feedback
# shows no hidden test.
from gdrlab.autograde.steps import configure  # noqa: E402

configure(c)
