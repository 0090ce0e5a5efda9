"""Wire formats of the two client dialects, kept apart from serving logic."""
