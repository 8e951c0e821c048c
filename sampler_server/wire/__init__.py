"""The code generator of the wire (``codegen``); the wire itself is ``sampler_common.wire``,
shared with the clients."""
