# Types for the part of django-treebeard Sill uses (its own stubs need Python 3.12).
