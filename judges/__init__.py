"""Judging turns from their next state: deterministic signals, the user's reaction, PRM votes, hints."""
