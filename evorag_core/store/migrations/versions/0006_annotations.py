"""The annotation queue: annotation_items (an agent state with K candidates, or an evidence set to judge),
annotation_labels (one per annotator and item) and annotation_leases (who is shown an item now, until when).

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "annotation_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("key", sa.String(200), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("resolution", sa.JSON(), nullable=True),
        sa.Column("resolved_by", sa.String(200), nullable=True),
        sa.Column("resolved_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_annotation_items"),
        sa.UniqueConstraint("key", name="uq_annotation_items_key"),
    )
    op.create_table(
        "annotation_labels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("annotator", sa.String(200), nullable=False),
        sa.Column("decision", sa.String(20), nullable=False),
        sa.Column("ranking", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_annotation_labels"),
        sa.ForeignKeyConstraint(["item_id"], ["annotation_items.id"],
                                name="fk_annotation_labels_item_id_annotation_items", ondelete="CASCADE"),
        sa.UniqueConstraint("item_id", "annotator", name="uq_annotation_labels_item_id_annotator"),
    )
    op.create_index("ix_annotation_labels_item_id", "annotation_labels", ["item_id"])
    op.create_index("ix_annotation_labels_annotator", "annotation_labels", ["annotator"])
    op.create_table(
        "annotation_leases",
        sa.Column("item_id", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("annotator", sa.String(200), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("item_id", "annotator", name="pk_annotation_leases"),
        sa.ForeignKeyConstraint(["item_id"], ["annotation_items.id"],
                                name="fk_annotation_leases_item_id_annotation_items", ondelete="CASCADE"),
    )
    op.create_index("ix_annotation_leases_expires_at", "annotation_leases", ["expires_at"])


def downgrade() -> None:
    op.drop_table("annotation_leases")
    op.drop_table("annotation_labels")
    op.drop_table("annotation_items")
