"""Metric reports trainers send back, stored idempotently, and the tables built from them."""
