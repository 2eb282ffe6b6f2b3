"""The ledger service as a FastAPI app: as the spec has it (`same`), or with
routes, fields and enum values moved (`moved`). Prints the app's own
OpenAPI document, as FastAPI serves it at /openapi.json."""

import enum
import json
import sys
from typing import Annotated

from fastapi import FastAPI, Header
from pydantic import BaseModel

MOVED = sys.argv[1] == "moved"


class SpendGrouping(str, enum.Enum):
    service = "service"
    if MOVED:
        pipeline = "pipeline"
    else:
        provider = "provider"


class SpendLine(BaseModel):
    key: str
    cost: float
    currency: str | None = None
    if MOVED:
        share: float


class Spend(BaseModel):
    group_by: SpendGrouping | None = None
    items: list[SpendLine]


class LedgerTotals(BaseModel):
    pipeline_id: str | None = None
    total_cost: float | None = None
    currency: str | None = None
    if MOVED:
        calls: str | None = None
    else:
        calls: int | None = None
    breakdown: dict | None = None


# Mounted under /ledger by the platform's router; the document's paths are the app's own.
app = FastAPI(title="ledger")


@app.get("/api/v1/ledger/spend", response_model=Spend)
def spend(group_by: SpendGrouping, x_tenant_id: Annotated[str, Header()]):
    raise NotImplementedError


if MOVED:

    @app.get("/api/v1/ledger/totals", response_model=LedgerTotals)
    def totals(pipeline_id: str, period: str, x_tenant_id: Annotated[str, Header()]):
        raise NotImplementedError

    @app.get("/api/v1/ledger/export")
    def export(x_tenant_id: Annotated[str, Header()]) -> list[SpendLine]:
        raise NotImplementedError

else:

    @app.get("/api/v1/ledger/totals", response_model=LedgerTotals)
    def totals(pipeline_id: str, x_tenant_id: Annotated[str, Header()]):
        raise NotImplementedError


print(json.dumps(app.openapi()))
