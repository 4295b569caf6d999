"""Serving engines behind one interface: embedded (transformers + peft), SGLang, and a null engine."""
