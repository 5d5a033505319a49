"""PySpark audit of journals and client histories. Arrives with the audit issue."""
