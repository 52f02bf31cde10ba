"""The hazards of part C of the eleventh blind census (docs/log/2026-12-07-scan-blind-census-11-c.md), reproduced.

One test per true hazard the census found: forced onto the dead object's address, the released
code answers for the dead object; with the first object kept alive (the control) it answers
right. A test runs only against the release the census read and is skipped, naming it, otherwise:

    pip install --target DIR here-search-demo==0.36.5 ml-goodput-measurement==0.2.3
    pip install --target DIR djust==1.2.6 scrapyx-mw==0.2.2
    PYTHONPATH=DIR:$PWD .venv/bin/python -m pytest -p no:xdist cases/blind/test_blind_census_11_c.py -q

here-search-demo's result dict, djust's template string and scrapyx-mw's request are made by the
test (the dict as the search response gives it, the string by the view's own
``_get_template_content()``, the request as a spider yields it), so those tests hold the first
one in a one-item list and make the next with ``land`` (through ``_next``, which makes it
anywhere for the control). ml-goodput-measurement's ``_CloudLogger`` allocates a Cloud Logging
client, a handler and its worker thread before it is done, so that test places the next one with
``born_on_death_of``. Everything the libraries run is released code, unchanged; the only thing
the tests provide besides data is a service-account file with a key made on the spot, so that
the Cloud Logging client can be built (nothing is sent).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import logging
import os
import tempfile

from cases.blind.pinned import Pins, only_holder
from cases.blind.pinned import next_object as _next
from harness.idreuse.landing import born_on_death_of
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("here-search-demo==0.36.5", "ml-goodput-measurement==0.2.3", "djust==1.2.6", "scrapyx-mw==0.2.2")


def _place(number: int) -> dict:
    """A place result as the HERE search response gives it (a new dict per response; the result
    dict is made before its contents, as a parser makes it)."""
    data: dict = {}
    data["title"] = f"Place {number}"
    data["id"] = f"here:pds:place:census-{number}"
    data["resultType"] = "place"
    data["address"] = {"label": f"Place {number}, Censusweg {number}x, Springfield"}
    data["position"] = {"lat": 1.0 + number, "lng": 2.0 + number}
    data["categories"] = [{"id": "100-1000-0000", "name": "Restaurant", "primary": True}]
    return data


def test_here_search_demo_shows_a_dead_results_details_for_a_result_born_on_its_address():
    """here_search_demo/widgets/output_details.py:73-83, :229-232 cache each result's details HTML
    in the class-level ``DetailsMixin._html_cache[(id(data), image_variant)]`` (512 entries,
    first in first out), holding nothing of the result dict; ``ResultDetailsBox(item.data)`` is
    built whenever a result is expanded, and every search response is a new set of dicts. A
    result born on a dead result's address is shown with the dead result's details."""
    output_details = PINS.need("here-search-demo", "here_search_demo.widgets.output_details")

    def shown(data: dict) -> str:
        return output_details.ResultDetailsBox(data).children[0].value

    kept = []   # every result shown stays alive, so the control can't be born on one

    def answer(reuse: bool, first: int, second: int) -> str:
        box = [_place(first)]
        assert f"Censusweg {first}x" in shown(box[0])
        alive = box[0] if not reuse else None
        with quiet_allocator():
            later, held = _next(box, lambda: _place(second), reuse)
        del held
        kept.extend([later, alive])
        return shown(later)

    forced = answer(reuse=True, first=1, second=2)
    assert "Censusweg 1x" in forced and "Censusweg 2x" not in forced    # released: the dead result's details
    control = answer(reuse=False, first=3, second=4)
    assert "Censusweg 4x" in control and "Censusweg 3x" not in control  # control


def _service_account(path: str) -> None:
    """A service-account file with a key made here: enough for the Cloud Logging client to be built."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    with open(path, "w") as out:
        json.dump({"type": "service_account", "project_id": "census-project", "private_key_id": "census",
                   "private_key": pem, "client_email": "census@census-project.iam.gserviceaccount.com",
                   "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token"}, out)


def test_ml_goodput_gives_a_cloud_logger_born_on_a_dead_ones_address_its_handler_too(monkeypatch):
    """ml_goodput_measurement/src/goodput.py:137-151 gives each ``_CloudLogger`` the stdlib logger
    ``_ml_goodput_async.{log_name}.{id(self)}`` and adds its CloudLoggingHandler, never removed;
    the logging manager keeps every logger, with its handlers, for the process (the comment at
    :137-145 added ``id(self)`` so that two loggers in one process would not share one). A
    recorder's or calculator's ``_CloudLogger`` born on a dead one's address gets the dead one's
    logger with the dead one's handler still on it: every entry is uploaded twice."""
    PINS.need("ml-goodput-measurement", "ml_goodput_measurement")
    with tempfile.TemporaryDirectory(prefix="census11c-") as tmp:
        credentials = os.path.join(tmp, "service-account.json")
        _service_account(credentials)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", credentials)
        with warnings_quiet():
            from ml_goodput_measurement.src import goodput

        made = []   # every logger made stays alive in the control, so no address is shared

        def handlers(reuse: bool, job: str) -> int:
            box = [goodput._CloudLogger(f"{job}-first", "census_goodput")]
            assert len(box[0]._async_logger.handlers) == 1
            gc.collect()                                   # the construction's reference cycles, gone
            if reuse:
                only_holder(box, "the first logger")
                with quiet_allocator(), born_on_death_of(goodput._CloudLogger, box) as landing:
                    later = goodput._CloudLogger(f"{job}-second", "census_goodput")
                landing.require()
            else:
                made.append(box[0])
                later = goodput._CloudLogger(f"{job}-second", "census_goodput")
            made.append(later)
            return len(later._async_logger.handlers)

        try:
            assert handlers(reuse=True, job="forced") == 2       # released: the dead logger's handler too
            assert handlers(reuse=False, job="control") == 1     # control
        finally:
            for name, stdlib_logger in list(logging.Logger.manager.loggerDict.items()):
                if name.startswith("_ml_goodput_async.census_goodput.") and isinstance(stdlib_logger, logging.Logger):
                    for handler in list(stdlib_logger.handlers):   # the dead loggers' handlers too
                        stdlib_logger.removeHandler(handler)
                        handler.close()


@contextlib.contextmanager
def warnings_quiet():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


_NAMES = "<ul>{% for u in users %}<li>{{ u.username }}</li>{% endfor %}</ul>\n" + "<!-- names list -->" * 30
_EMAILS = "<ul>{% for u in users %}<li>{{ u.email }}</li>{% endfor %}</ul>\n" + "<!-- mail list -->" * 30 + "x" * 33


def _djust_setup(tmp: str):
    for name, text in (("names.html", _NAMES), ("emails.html", _EMAILS)):
        with open(os.path.join(tmp, name), "w") as out:
            out.write(text)
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(DEBUG=False, SECRET_KEY="census", USE_TZ=True,
                           INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "djust"],
                           DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
                           TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [tmp]}])
        django.setup()
    from django.core.management import call_command

    call_command("migrate", run_syncdb=True, verbosity=0)
    from django.contrib.auth.models import User

    for number in range(3):
        User.objects.get_or_create(username=f"user{number}", email=f"user{number}@example.org")
    return User


def test_djust_serializes_a_queryset_with_a_dead_templates_fields():
    """djust/mixins/jit.py:17-21, :254-263 remember each template's hash in the module-level
    ``_template_hash_cache[id(template_content)]``, never pruned ("safe within a single request
    lifetime", but the dict outlives the request), and look the JIT serializer up by that hash
    (:261-282); ``_get_template_content()`` (:104-166) makes a new string for each request of a
    ``template_name`` view. A template string born on a dead template's address is served the
    dead template's serializer: the queryset is serialized with the other template's fields."""
    PINS.need("djust", "djust")
    assert len(_NAMES) == len(_EMAILS)   # two templates of one size, so either may take the other's block
    with tempfile.TemporaryDirectory(prefix="census11c-") as tmp:
        User = _djust_setup(tmp)
        from djust.mixins.jit import JITMixin

        class NamesView(JITMixin):
            template_name = "names.html"

        class EmailsView(JITMixin):
            template_name = "emails.html"

        kept = []   # every template string used stays alive, so the control can't be born on one

        def serialized(reuse: bool) -> dict:
            with contextlib.redirect_stderr(io.StringIO()):   # the JIT's own cache-hit prints
                box = [NamesView()._get_template_content()]
                NamesView()._jit_serialize_queryset(User.objects.all(), box[0], "users")
                alive = box[0] if not reuse else None
                emails = EmailsView()
                with quiet_allocator():
                    later, held = _next(box, emails._get_template_content, reuse)
                del held
                kept.extend([later, alive])
                rows = emails._jit_serialize_queryset(User.objects.all(), later, "users")
            return rows[0]

        assert serialized(reuse=True) == {"username": "user0"}             # released: the dead template's fields
        assert serialized(reuse=False) == {"email": "user0@example.org"}   # control


def test_scrapyx_gives_a_new_request_a_dead_requests_retry_count():
    """scrapyx_mw/middlewares/smart_retry.py:70, :125-133 count retries in the crawl-long
    ``SmartRetryMiddleware.request_retry_count[id(request)]``, never pruned, holding nothing of
    the request; ``_should_retry`` (:88-108) stops at ``SCRAPYX_RETRY_MAX_TIMES``. A request born
    on the address of a dead request that used its retries is not retried at all."""
    smart_retry = PINS.need("scrapyx-mw", "scrapyx_mw.middlewares.smart_retry")
    from scrapy import Spider
    from scrapy.http import HtmlResponse, Request
    from scrapy.settings import Settings

    spider = Spider(name="census")
    kept = []   # every request seen stays alive, so the control can't be born on one

    def retried(reuse: bool, first: str, second: str) -> bool:
        middleware = smart_retry.SmartRetryMiddleware(Settings({"SCRAPYX_RETRY_MAX_TIMES": 1}))
        with warnings_quiet(), contextlib.redirect_stderr(io.StringIO()):
            box = [Request(first)]
            busy = HtmlResponse(url=first, status=503, body=b"busy", request=box[0])
            assert middleware.process_response(box[0], busy, spider) is not None   # retried once
            assert middleware.process_response(box[0], busy, spider) is None       # and no more
            del busy
            alive = box[0] if not reuse else None
            with quiet_allocator():
                later, held = _next(box, lambda: Request(second), reuse)
            del held
            kept.extend([later, alive])
            response = HtmlResponse(url=second, status=503, body=b"busy", request=later)
            return middleware.process_response(later, response, spider) is not None

    assert retried(reuse=True, first="https://a.example.org/1", second="https://b.example.org/2") is False
    assert retried(reuse=False, first="https://c.example.org/3", second="https://d.example.org/4") is True
