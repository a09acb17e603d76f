"""Alembic environment for evorag: migrates the connection handed over by evorag_core.store.migrate.

There is no alembic.ini and no offline (SQL script) mode: `open_store(url)` runs the migrations.
"""
from alembic import context

from evorag_core.errors import StoreError
from evorag_core.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise StoreError(
        "evorag migrations run through evorag_core.store.open_store(url) or evorag_core.store.migrate.upgrade"
    )

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
