"""Agents: turn a slot's context (spec, library, shapes, board notes, feedback) into candidates."""
