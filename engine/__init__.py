"""Strata's engine: llama.cpp driven through llama-cpp-python, token ids in, token ids out (see protocol.py)."""
