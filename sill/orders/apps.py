from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "sill.orders"
    label = "orders"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        # Register the tasks in every process (web too): charging enqueues the attention
        # notice by name (sill.queue).
        import sill.orders.tasks  # noqa: F401
        from sill.database_down import set_session_limits
        from sill.sql import fast_timestamptz_loader

        # Every PostgreSQL connection reads timestamps with psycopg's C loader (sill/sql.py).
        connection_created.connect(fast_timestamptz_loader, dispatch_uid="sill-timestamptz")
        # And Sill's lock and idle-in-transaction timeouts (sill/database_down.py).
        connection_created.connect(set_session_limits, dispatch_uid="sill-session-limits")
