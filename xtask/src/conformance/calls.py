"""A few calls of the client openapi-python-client generated from the GRAG
document, against grag-sim: `calls.py <package> <url> <key> <tenant> <document>`.
Exits non-zero, saying why, on the first answer that is not what the
document promises."""

import importlib
import json
import sys

package, url, key, tenant, document = sys.argv[1:6]
client = importlib.import_module(package).AuthenticatedClient(base_url=url, token=key)
models = importlib.import_module(f"{package}.models")


def route(name):
    return importlib.import_module(f"{package}.api.workspaces.workspaces_{name}")


def check(what, ok, answer):
    if not ok:
        sys.exit(f"{what}: {answer.status_code} {answer.content[:300]!r}")
    print(f"ok: {what}: {answer.status_code}")


health = route("health").sync_detailed(client=client)
check("health", health.status_code == 200 and health.parsed.status, health)

body = models.CreateKb(kb_id="kb-python", name="From the Python client")
created = route("create_kb").sync_detailed(client=client, body=body, x_tenant_id=tenant)
check("create_kb", 200 <= created.status_code < 300 and created.parsed.kb_id == "kb-python", created)

# The second create answers 409; the document marks that answer a success.
with open(document, encoding="utf-8") as f:
    doc = json.load(f)
op = doc["paths"]["/workspaces/api/v1/kbs"]["post"]
again = route("create_kb").sync_detailed(client=client, body=body, x_tenant_id=tenant)
success = op["responses"][str(again.status_code)].get("x-success", False)
check("create_kb again (409, x-success)", again.status_code == 409 and success, again)

kbs = route("list_kbs").sync_detailed(client=client, x_tenant_id=tenant)
check("list_kbs", kbs.status_code == 200 and any(kb.kb_id == "kb-python" for kb in kbs.parsed), kbs)

settings = route("get_settings").sync_detailed(client=client, x_tenant_id=tenant)
check("get_settings", settings.status_code == 200, settings)
