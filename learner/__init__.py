"""Learning from judged turns: samples, losses, LoRA training, adapter versions and publishing."""
