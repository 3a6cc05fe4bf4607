"""Transducer parts shared by transducer architectures: icefall's stateless predictor and
the additive joiner (``stateless``)."""
