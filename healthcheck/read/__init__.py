"""Readers: they fill records and change nothing."""
