"""The WSGI entry point (gunicorn ``sill.wsgi``).

Once the application is loaded, with its URLconf (which imports every view and what the views
use), everything loaded so far is moved out of the garbage collector's sight
(``gc.freeze()``): modules, classes, functions and Django's registries live as long as the
process, yet a full collection walked all of them each time, about 60-90 ms here (longer
when the workers of one server, having served about as many requests, collect together on
shared cores). Those pauses were the slowest decisions' latency at 8 clients
(bench/agent_http.py). The collector still collects everything made afterwards.
"""

import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sill.settings")
application = get_wsgi_application()
get_resolver().url_patterns  # noqa: B018  (loads the URLconf now, not on the first request)
gc.collect()  # what loading left unreachable is freed, not frozen
gc.freeze()
