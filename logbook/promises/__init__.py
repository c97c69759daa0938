"""Preregistrations and whether they were kept: predictions, contingency plans, amendments and reviews, and `verify`,
which checks a study against what it promised (`trust/` sits beside this layer)."""
