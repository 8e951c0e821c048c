"""The assembler: record ids in, packed uint8 NHWC pixel tensors out.

It reads records from stores and decodes/resizes them; it never decides which
records (samplers do) and knows nothing of gRPC (the service packs its output).
"""
