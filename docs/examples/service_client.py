"""Start a run on `keel serve`, print its events as they come, then its result."""
import asyncio, json, os, sys
from websockets.asyncio.client import connect

async def main(url, workspace):
    token = os.environ["KEEL_SERVER_TOKEN"]
    async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        notes = []  # run/event notifications read while waiting for an answer
        async def call(id, method, params):
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            while "id" not in (message := json.loads(await ws.recv())):
                notes.append(message)
            return message["result"]
        await call(1, "initialize", {"client_name": "example"})
        run = await call(2, "run/start", {"prompt": "What is in here?", "workspace": workspace, "tools": ["ls"]})
        while True:  # run/event notifications, until the terminal one
            event = (notes.pop(0) if notes else json.loads(await ws.recv()))["params"]["event"]
            print(event["seq"], event["type"])
            if event["type"] in ("run_settled", "run_failed", "run_cancelled"):
                break
        result = (await call(3, "run/result", {"run_id": run["run_id"]}))["result"]
        print(result["state"], "-", result["message"]["content"][0]["text"])

asyncio.run(main(sys.argv[1], sys.argv[2]))
