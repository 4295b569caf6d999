"""The HTTP edge: OpenAI-compatible routes, sessions, turn logging and the serving engines."""
