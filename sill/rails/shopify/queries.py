"""The Admin GraphQL operations Sill sends (each named: the operation name is in every POST)."""

MONEY = "shopMoney { amount currencyCode }"

PLAN = "shop { plan { partnerDevelopment publicDisplayName } }"

# Settings → Rails' "Test connection": the shop's name and whether it is a development store.
SHOP = (
    "query SillShop { shop { name myshopifyDomain plan { partnerDevelopment publicDisplayName } } }"
)

ORDER_FIELDS = f"""
fragment SillOrder on Order {{
  id name createdAt updatedAt test email cancelledAt currencyCode
  totalPriceSet {{ {MONEY} }}
  customer {{ id email firstName lastName createdAt }}
  lineItems(first: 100) {{
    nodes {{ sku name quantity originalUnitPriceSet {{ {MONEY} }} }}
  }}
  transactions(first: 50) {{
    id kind status test createdAt processedAt amountSet {{ {MONEY} }}
  }}
  refunds(first: 50) {{
    id createdAt note totalRefundedSet {{ {MONEY} }}
    transactions(first: 10) {{ nodes {{ status kind }} }}
  }}
  disputes {{ id status initiatedAs }}
}}
"""

ORDERS = (
    """
query SillOrders($first: Int!, $after: String, $query: String) {
  orders(first: $first, after: $after, query: $query, sortKey: UPDATED_AT) {
    nodes { ...SillOrder }
    pageInfo { hasNextPage endCursor }
  }
}
"""
    + ORDER_FIELDS
)

ORDER = (
    """
query SillOrder($id: ID!) {
  order(id: $id) { ...SillOrder }
}
"""
    + ORDER_FIELDS
)

REFUND_PLAN = f"""
query SillRefundPlan($id: ID!, $amount: Money!) {{
  {PLAN}
  order(id: $id) {{
    id test currencyCode presentmentCurrencyCode
    suggestedRefund(refundAmount: $amount, suggestFullRefund: false) {{
      suggestedTransactions {{
        gateway kind amountSet {{ {MONEY} }} parentTransaction {{ id }}
      }}
    }}
  }}
}}
"""

# The idempotent directive is mandatory on refundCreate from API version 2026-04; no
# refundLineItems, so nothing is restocked: the refund is money only.
REFUND_CREATE = f"""
mutation SillRefundCreate($input: RefundInput!, $key: String!) {{
  refundCreate(input: $input) @idempotent(key: $key) {{
    refund {{
      id createdAt note totalRefundedSet {{ {MONEY} }}
      transactions(first: 10) {{ nodes {{ id status kind }} }}
    }}
    userErrors {{ field message }}
  }}
}}
"""

REFUNDS = f"""
query SillRefunds($id: ID!) {{
  order(id: $id) {{
    id
    refunds(first: 250) {{
      id createdAt note totalRefundedSet {{ {MONEY} }}
      transactions(first: 10) {{ nodes {{ status kind }} }}
    }}
    disputes {{ id status initiatedAs }}
    createdAt totalPriceSet {{ {MONEY} }}
  }}
}}
"""

CHARGE_FACTS = f"""
query SillChargeFacts($id: ID!) {{
  {PLAN}
  node(id: $id) {{
    ... on OrderTransaction {{
      id
      order {{
        id createdAt test currencyCode
        totalPriceSet {{ {MONEY} }}
        totalRefundedSet {{ {MONEY} }}
        disputes {{ id status initiatedAs }}
      }}
    }}
  }}
}}
"""

CUSTOMER_FACTS = f"""
query SillCustomerFacts($id: ID!, $first: Int!, $query: String!) {{
  customer(id: $id) {{
    id createdAt
    orders(first: $first, query: $query, sortKey: CREATED_AT, reverse: true) {{
      nodes {{ id currencyCode totalRefundedSet {{ {MONEY} }} }}
      pageInfo {{ hasNextPage }}
    }}
  }}
}}
"""
