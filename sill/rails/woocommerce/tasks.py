"""The WooCommerce Celery tasks, defined beside the services they call; imported here so that
workers register them (sill.rails.tasks imports this module)."""

from sill.rails.woocommerce.record import record_woocommerce_refund, retry_woocommerce_records
from sill.rails.woocommerce.webhooks import process_woocommerce_event

__all__ = ["process_woocommerce_event", "record_woocommerce_refund", "retry_woocommerce_records"]
