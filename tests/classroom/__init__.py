"""Tests of the class view (gdrlab class serve/join/submit, gdrlab.classroom)."""
