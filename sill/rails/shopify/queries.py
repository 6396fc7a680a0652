"""The Admin GraphQL operations Sill sends (each named: the operation name is in every POST)."""

MONEY = "shopMoney { amount currencyCode }"

PLAN = "shop { plan { partnerDevelopment publicDisplayName } }"

# Settings → Rails' "Test connection": the shop's name and whether it is a development store.
SHOP = (
    "query SillShop { shop { name myshopifyDomain plan { partnerDevelopment publicDisplayName } } }"
)

# A refund's transactions read with it: enough for its state (one succeeded is enough), few
# enough that a list of refunds fits Shopify's cost limit (sill.rails.shopify.rail). They are
# a connection: a refund none of whose first ones succeeded is read on (SillRefundTransactions).
REFUND_TRANSACTIONS = 5
REFUND_TRANSACTION_PAGE = "nodes { status kind } pageInfo { hasNextPage endCursor }"

LINE_ITEM = f"sku name quantity originalUnitPriceSet {{ {MONEY} }}"
TRANSACTION = f"id kind status test createdAt processedAt amountSet {{ {MONEY} }}"
REFUND = f"""id createdAt note totalRefundedSet {{ {MONEY} }}
    transactions(first: {REFUND_TRANSACTIONS}) {{ {REFUND_TRANSACTION_PAGE} }}"""

# ``lineItems`` is a connection, read on by cursor (SillOrderLines). ``transactions`` and
# ``refunds`` are plain lists: Shopify cuts each at ``first``, says nothing of what it left out
# and has no cursor to read on (see sill.rails.shopify.rail for what Sill does about it). The
# sizes are variables so that the rail compares what came back with what it asked for.
ORDER_FIELDS = f"""
fragment SillOrder on Order {{
  id name createdAt updatedAt test email cancelledAt currencyCode
  totalPriceSet {{ {MONEY} }}
  customer {{ id email firstName lastName createdAt }}
  lineItems(first: $lines) {{
    nodes {{ {LINE_ITEM} }}
    pageInfo {{ hasNextPage endCursor }}
  }}
  transactions(first: $transactions) {{ {TRANSACTION} }}
  refunds(first: $refunds) {{
    {REFUND}
  }}
  disputes {{ id status initiatedAs }}
}}
"""

ORDERS = (
    """
query SillOrders(
  $first: Int!, $after: String, $query: String, $lines: Int!, $transactions: Int!, $refunds: Int!
) {
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
query SillOrder($id: ID!, $lines: Int!, $transactions: Int!, $refunds: Int!) {
  order(id: $id) { ...SillOrder }
}
"""
    + ORDER_FIELDS
)

# The rest of an order's line items, after the ones its order query read.
ORDER_LINES = f"""
query SillOrderLines($id: ID!, $lines: Int!, $after: String) {{
  order(id: $id) {{
    id
    lineItems(first: $lines, after: $after) {{
      nodes {{ {LINE_ITEM} }}
      pageInfo {{ hasNextPage endCursor }}
    }}
  }}
}}
"""

# An order's transactions alone, as many as Shopify lists, for an order whose order query
# came back with as many as it asked for.
ORDER_TRANSACTIONS = f"""
query SillOrderTransactions($id: ID!, $transactions: Int!) {{
  order(id: $id) {{
    id
    transactions(first: $transactions) {{ {TRANSACTION} }}
  }}
}}
"""

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

# The rest of a refund's transactions, after the ones read with it.
REFUND_TRANSACTIONS_AFTER = f"""
query SillRefundTransactions($id: ID!, $transactions: Int!, $after: String) {{
  refund(id: $id) {{
    id
    transactions(first: $transactions, after: $after) {{ {REFUND_TRANSACTION_PAGE} }}
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
      transactions(first: 10) {{ nodes {{ id status kind }} pageInfo {{ hasNextPage }} }}
    }}
    userErrors {{ field message }}
  }}
}}
"""

# An order's refunds alone (refund recovery, and an order whose order query came back with as
# many refunds as it asked for).
REFUNDS = f"""
query SillRefunds($id: ID!, $refunds: Int!) {{
  order(id: $id) {{
    id
    refunds(first: $refunds) {{
      {REFUND}
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
        id createdAt test currencyCode presentmentCurrencyCode
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
