"""Agent purchases: an order placed by the agent, charged on the site's rail by a task."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from refunds import mandates
from refunds.mandates import VerifiedMandate
from refunds.models import Mandate
from sill.orders.models import Charge, ChargeStatus, Customer, Order, OrderStatus
from sill.orders.services import NewLine, create_order, record_charge_result, set_order_status
from sill.rails.base import ChargeRequest, RailError
from sill.rails.registry import RailDisabled, rail_account_for, rail_for


def place_order(*, mandate: Mandate, verified: VerifiedMandate) -> Order:
    """Create the order the purchase mandate describes; charge it after commit."""
    intent = verified.intent
    assert isinstance(intent, mandates.PurchaseIntent)
    site = mandate.site
    customer = (
        Customer.objects.filter(site=site, email__iexact=intent.buyer_email).order_by("pk").first()
    )
    if customer is None:
        customer = Customer.objects.create(
            site=site, email=intent.buyer_email, name=intent.buyer_name
        )
    order = create_order(
        site=site,
        lines=[
            NewLine(sku=li.sku, name=li.name, quantity=li.quantity, unit_price=li.unit_price)
            for li in intent.line_items
        ],
        currency=intent.currency,
        buyer_name=intent.buyer_name,
        buyer_email=intent.buyer_email,
        source_mandate_id=mandate.mandate_id,
        placed_by_agent=mandate.agent,
        customer=customer,
    )
    try:
        rail_account_for(site_id=site.id, rail=intent.payment_rail)
    except RailDisabled:
        set_order_status(order=order, status=OrderStatus.CANCELLED)
        return order
    Charge.objects.create(
        order=order,
        rail=intent.payment_rail,
        amount_minor=order.total_minor,
        currency=order.currency,
        status=ChargeStatus.PENDING,
    )
    from refunds.tasks import charge_order_task

    charge_order_task.delay_on_commit(order.id, intent.payment_method)
    return order


def charge_order(*, order_id: str, payment_method: str) -> str:
    """Charge the order's pending charge once (idempotency key from the order id)."""
    charge = Charge.objects.select_related("order").filter(order_id=order_id).first()
    if charge is None or charge.status != ChargeStatus.PENDING:
        return "done"
    order = charge.order
    rail = rail_for(site_id=order.site_id, rail=charge.rail)
    request = ChargeRequest(
        order_id=order.id,
        amount=order.total,
        payment_method=payment_method,
        idempotency_key=f"sill-charge-{order.id}",
        customer_email=order.buyer_email,
        description=f"Order {order.number}",
    )
    try:
        result = rail.charge(request)
    except RailError as exc:
        if exc.retryable:
            raise
        record_charge_result(charge=charge, succeeded=False, failure_message=exc.message)
        with transaction.atomic():
            locked = Order.objects.select_for_update().get(pk=order.pk)
            set_order_status(order=locked, status=OrderStatus.CANCELLED)
        return "failed"
    record_charge_result(
        charge=charge,
        succeeded=True,
        provider_payment_id=result.provider_payment_id,
        provider_charge_id=result.provider_charge_id,
        captured_at=result.captured_at or timezone.now(),
    )
    if result.provider_customer_id and order.customer_id:
        Customer.objects.filter(pk=order.customer_id, rail_customer_id="").update(
            rail_customer_id=result.provider_customer_id
        )
    return "succeeded"
