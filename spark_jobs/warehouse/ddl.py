"""Making and evolving the warehouse's tables: format v2, the schemas of
:mod:`spark_jobs.schemas`, identity partitions on columns inside every data file (one
partition value per file), the table properties every table gets, and a name mapping
(files are written without field ids: columns are found by name).

A table is made where missing, with an empty first snapshot on ``main`` (a branch is made
from it), and brought up to this version's columns, partition fields and properties where
an earlier version made it, by Iceberg's own schema and partition evolution. Typed
per-topic tables (:mod:`spark_jobs.derive.typed`) are unpartitioned and grow by
``union_by_name``. pyiceberg's own commit retries are off on these tables
(``commit.retry.num-retries`` 0): they would rebase a commit onto a moved ``main`` without
the publish's overlap check (:func:`.history.check_overlap`).
"""

from __future__ import annotations

import logging

import pyarrow as pa

from spark_jobs import schemas
from spark_jobs.warehouse import commits
from spark_jobs.warehouse.commits import COMMIT_ATTEMPTS
from spark_jobs.warehouse.errors import CommitRefused
from spark_jobs.warehouse.naming import STAGE

log = logging.getLogger(__name__)

NAME_MAPPING = "schema.name-mapping.default"
TABLE_PROPERTIES = {
    "format-version": "2",
    # our own retry loop re-checks the overlap before committing again
    "commit.retry.num-retries": "0",
    "write.parquet.compression-codec": "lz4",
    # the job's files carry min/max statistics for these columns only (and no null
    # counts elsewhere): the catalog keeps bounds for them and asks for nothing else
    "write.metadata.metrics.default": "none",
    **{f"write.metadata.metrics.column.{c}": "full" for c in schemas.STATISTICS},
}


def partition_spec(name: str, iceberg_schema):
    """Identity partitions on :data:`schemas.PARTITIONS` columns (inside every file)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    fields = [PartitionField(source_id=iceberg_schema.find_field(col).field_id,
                             field_id=1000 + i, transform=IdentityTransform(), name=col)
              for i, col in enumerate(schemas.PARTITIONS[name])]
    return PartitionSpec(*fields)


def create_table(catalog, identifier: tuple[str, str], schema: pa.Schema, *,
                 partitioned: bool):
    """Table ``identifier`` made with Arrow ``schema`` (its namespace too, where missing)
    and :data:`TABLE_PROPERTIES`; ``partitioned``: identity partitions on the
    :data:`schemas.PARTITIONS` columns of the table's name. None where another process
    made it first."""
    from pyiceberg.exceptions import TableAlreadyExistsError

    from spark_jobs.warehouse import _pyiceberg

    namespace = identifier[0]
    try:
        catalog.create_namespace_if_not_exists(namespace)
    except Exception:
        # two first runs at once: the other made it between pyiceberg's check and its
        # insert (a SQL catalog raises its database's unique-constraint error)
        if not catalog.namespace_exists(namespace):
            raise
    if partitioned:  # the spec names its columns by the field ids they will have
        ice = _pyiceberg.iceberg_schema(schema)
        made = {"schema": ice, "partition_spec": partition_spec(identifier[-1], ice)}
    else:  # create_table converts an Arrow schema itself
        made = {"schema": schema}
    try:
        # a copy: pyiceberg's new_table_metadata pops format-version from the dict it gets
        return catalog.create_table(identifier, properties=dict(TABLE_PROPERTIES), **made)
    except TableAlreadyExistsError:
        return None


def add_first_snapshot(table, schema: pa.Schema) -> None:
    """Commit ``table``'s empty first snapshot on ``main`` (a run's branch is made from it)
    and its name mapping; nothing where another process did first."""
    def commit():
        with table.transaction() as tx:
            # files are written without field ids: columns are found by name
            tx.set_properties(**{NAME_MAPPING: table.schema().name_mapping.model_dump_json()})
            tx.append(schema.empty_table(), snapshot_properties={STAGE: "created"})

    try:
        commits.send(table, commit, landed=lambda t: t.current_snapshot() is not None)
    except CommitRefused:
        pass  # another process made it


def _evolution(table, name: str):
    """The columns, partition fields and table properties this version adds to ``table``."""
    have = {f.name for f in table.schema().fields}
    spec = {table.schema().find_column_name(f.source_id) for f in table.spec().fields}
    cols = [f.name for f in schemas.TABLES[name] if f.name not in have]
    parts = [c for c in schemas.PARTITIONS[name] if c not in spec]
    props = {k: v for k, v in TABLE_PROPERTIES.items()
             if k != "format-version" and k not in table.properties}
    return cols, parts, props


def evolve(table, name: str, attempts: int = COMMIT_ATTEMPTS):
    """``table`` (warehouse table ``name``) with the columns, partition fields and table
    properties this version adds, by Iceberg's own schema and partition evolution in one
    commit: files written before keep their columns (read as null) and their spec."""
    def step(attempt: int):
        nonlocal table
        if attempt:
            table = table.refresh()
        cols, parts, props = _evolution(table, name)
        if not (cols or parts or props):
            return table
        log.warning("%s: adding columns %s, partition fields %s, properties %s",
                    name, cols, parts, sorted(props))

        def commit():
            with table.transaction() as tx:
                if cols:
                    with tx.update_schema() as update:
                        update.union_by_name(schemas.TABLES[name])
                if parts:
                    with tx.update_spec() as update:
                        for col in parts:
                            update.add_identity(col)
                # files are written without field ids: columns are found by name
                tx.set_properties(**props, **{NAME_MAPPING: tx.table_metadata.schema()
                                              .name_mapping.model_dump_json()})

        commits.send(table, commit, landed=lambda t: not any(_evolution(t, name)))
        return table.refresh()

    return commits.retry(f"{name}: could not evolve the table", step, attempts=attempts)


def _widened(table, schema: pa.Schema) -> bool:
    have = table.schema().as_arrow()
    return all(f.name in have.names and _covers(have.field(f.name).type, f.type) for f in schema)


def widen(table, name: str, schema: pa.Schema, attempts: int = COMMIT_ATTEMPTS):
    """Typed table ``table`` (named ``name``) with at least the columns of ``schema``, by
    Iceberg's ``union_by_name`` (new columns optional, old rows read null)."""
    def step(attempt: int):
        nonlocal table
        if attempt:
            table = table.refresh()
        if _widened(table, schema):
            return table

        def commit():
            with table.transaction() as tx:
                with tx.update_schema() as update:
                    update.union_by_name(schema)
                tx.set_properties(**{NAME_MAPPING: tx.table_metadata.schema()
                                     .name_mapping.model_dump_json()})

        commits.send(table, commit, landed=lambda t: _widened(t, schema))
        return table.refresh()

    return commits.retry(f"{name}: could not evolve the table", step, attempts=attempts)


def _covers(have, want) -> bool:
    """Whether Arrow type ``have`` (a table's) holds every struct field of ``want``."""
    if pa.types.is_struct(want):
        if not pa.types.is_struct(have):
            return False
        names = {have.field(i).name: have.field(i).type for i in range(have.num_fields)}
        return all(want.field(i).name in names and _covers(names[want.field(i).name], want.field(i).type)
                   for i in range(want.num_fields))
    if pa.types.is_list(want) or pa.types.is_large_list(want):
        return hasattr(have, "value_type") and _covers(have.value_type, want.value_type)
    if pa.types.is_map(want):
        return pa.types.is_map(have) and _covers(have.item_type, want.item_type)
    return True
