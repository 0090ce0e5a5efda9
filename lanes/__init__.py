"""The serve layer: dialects in, one internal form, template + exact count, engine events out."""
