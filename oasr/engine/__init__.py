"""The inference engine: scheduler, model runner, decode families, streaming runtimes."""
