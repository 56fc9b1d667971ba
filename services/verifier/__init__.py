"""Verifier: static checks -> load -> correctness -> end to end -> verdict, on the slow-tier engine."""
