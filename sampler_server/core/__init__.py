"""Pure protocol logic: hierarchies, sampling, seeding; imports no gRPC, LMDB, torch or tensorflow."""
