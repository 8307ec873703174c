"""The fencegate command line and the tools around the product: lab, bench, model, soak.

The product is `lockclient`, `gateway` and `storage`; it never imports this
package. These tools import the product.
"""
