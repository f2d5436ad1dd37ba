"""Porting: the report's rows as device-agnostic source, as advice and as a patch."""
