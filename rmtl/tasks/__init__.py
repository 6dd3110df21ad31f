"""The tasks: everything one task defines, behind one Task object (rmtl.tasks.registry)."""
