"""A FastAPI API with per-endpoint limits as dependencies.

    uvicorn examples.fastapi_app:app

``POST /login`` allows 3 attempts per minute per client address; ``GET /users/{user_id}``
allows 5 per minute per user id, keyed on the validated path parameter.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI, Request, Response

from freqguard import AsyncGuard, Policy, Rule
from freqguard.integrations.starlette import Refused, enforce, limit_dependency, refused_handler


def build() -> FastAPI:
    """The app, on a guard of its own."""
    guard = AsyncGuard(policies=[Policy("user-reads", Rule("5/minute", by="user"))])

    async def per_user(user_id: int, request: Request, response: Response) -> int:
        """The validated id, capped per user: the endpoint takes it from here, so that
        FastAPI validates it once (a bad id is one error, not one per place declaring it)."""
        await enforce(guard, "user-reads", request=request, response=response, user=user_id)
        return user_id

    # 429s as the middleware sends them: problem+json with the rate-limit headers
    app = FastAPI(exception_handlers={Refused: refused_handler})

    @app.post("/login", dependencies=[Depends(limit_dependency(guard, "3/minute", name="login"))])
    async def login() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/users/{user_id}")
    async def read_user(user_id: int = Depends(per_user)) -> dict[str, int]:
        return {"user": user_id}

    return app


app = build()
