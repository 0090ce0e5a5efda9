"""Every request kept: a database row as the index, its full content in gzip segments."""
