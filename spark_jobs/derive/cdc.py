# TEMPORARY stub (not committed): the helper's module replaces it
import pyarrow as pa
def is_cdc(topic, rows, pattern): return False
def table_schema(x): return pa.schema([])
def changes(rows, schema): raise NotImplementedError
