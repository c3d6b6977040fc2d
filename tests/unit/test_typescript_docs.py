"""The TypeScript shown in the docs is the code the tests run: each ``ts`` block of
docs/agents.md and clients/typescript/README.md is a region of
``clients/typescript/examples/*.ts`` (between ``// docs:start NAME`` and
``// docs:end NAME``), which tests/processes/gateway/test_typescript_client.py
type-checks and runs against a real gateway; docs/mcp.md's ``js`` block is a region of
the MCP TypeScript SDK's test, which tests/processes/mcp/test_http.py runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "clients" / "typescript" / "examples"
PAGES = (ROOT / "docs" / "agents.md", ROOT / "clients" / "typescript" / "README.md")
REGION = re.compile(r"^// docs:start (\S+)\n(.*?)^// docs:end \1\n", re.DOTALL | re.MULTILINE)
TS_BLOCK = re.compile(r"^```ts\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def _regions() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(EXAMPLES.glob("*.ts")):
        for match in REGION.finditer(path.read_text(encoding="utf-8")):
            assert match.group(1) not in found, f"two regions named {match.group(1)}"
            found[match.group(1)] = match.group(2)
    return found


def test_every_typescript_block_of_the_docs_is_an_example_region() -> None:
    regions = _regions()
    assert set(regions) == {"client", "vercel-ai", "vercel-ai-approval"}
    for page in PAGES:
        blocks = TS_BLOCK.findall(page.read_text(encoding="utf-8"))
        assert sorted(blocks) == sorted(regions.values()), (
            f"{page.relative_to(ROOT)}: its ts blocks must be the regions of "
            "clients/typescript/examples/*.ts, each once"
        )


MCP_EXAMPLE = ROOT / "tests" / "processes" / "mcp" / "node" / "mcp_client.test.mjs"
JS_BLOCK = re.compile(r"^```js\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def test_the_mcp_typescript_example_is_the_code_its_test_runs() -> None:
    """docs/mcp.md's ``js`` block is the region of the MCP TypeScript SDK's test
    (tests/processes/mcp/test_http.py runs it against a real gateway)."""
    regions = {
        match.group(1): match.group(2)
        for match in REGION.finditer(MCP_EXAMPLE.read_text(encoding="utf-8"))
    }
    assert set(regions) == {"mcp-typescript"}
    blocks = JS_BLOCK.findall((ROOT / "docs" / "mcp.md").read_text(encoding="utf-8"))
    assert blocks == [regions["mcp-typescript"]], (
        "docs/mcp.md: its js block must be the mcp-typescript region of "
        "tests/processes/mcp/node/mcp_client.test.mjs"
    )
