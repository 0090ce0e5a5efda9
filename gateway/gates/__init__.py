"""The gates, one module each. A gate takes the RequestState and returns it, or raises ApiError."""
